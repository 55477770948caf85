"""`python -m pipeline.train`: a job, or one isolated job per config of a Hydra multirun (pipeline.commands.train)."""

from pipeline.commands.train import main

if __name__ == "__main__":
    main()
