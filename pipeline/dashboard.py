"""`python -m pipeline.dashboard`: optuna-dashboard over the project's studies (pipeline.commands.dashboard)."""

from pipeline.commands.dashboard import main

if __name__ == "__main__":
    main()
