"""`python -m pipeline.optimize`: the study: the fastest config that fits under a memory cap (pipeline.commands.optimize)."""

from pipeline.commands.optimize import main

if __name__ == "__main__":
    main()
