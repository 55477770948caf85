"""`python -m pipeline.card`: the result card of a recorded sweep or study (pipeline.commands.card)."""

from pipeline.commands.card import main

if __name__ == "__main__":
    main()
