"""Result cards: a recorded sweep's or study's result as JSON and Markdown (card), and cards of several machines
merged into one table by GPU (merge). Above `results`, which they read, and `render`, which they print with."""
