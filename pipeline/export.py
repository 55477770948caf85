"""`python -m pipeline.export`: a config as a plain TRL script (pipeline.commands.export)."""

from pipeline.commands.export import main

if __name__ == "__main__":
    main()
