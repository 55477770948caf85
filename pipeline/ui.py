"""`python -m pipeline.ui`: the MLflow UI over the project's store (pipeline.commands.ui)."""

from pipeline.commands.ui import main

if __name__ == "__main__":
    main()
