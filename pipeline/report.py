"""`python -m pipeline.report`: the report over a recorded sweep or study, or merged result cards (pipeline.commands.report)."""

from pipeline.commands.report import main

if __name__ == "__main__":
    main()
