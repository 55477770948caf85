"""The commands users type, apart from the library they drive: `python -m pipeline.<name>` runs
`pipeline.commands.<name>.main` (the top-level `pipeline/<name>.py` is only that line).

train (a job or a Hydra multirun), optimize (the study), report, card, export (the answer as a plain TRL script),
ui (MLflow's UI; mlflow_app is its server app), dashboard (optuna-dashboard); cli is what every one of them does
around Hydra: --help, the precheck of the whole command line, exit codes; arguments: the flags of those
that take flags, refused in one line; sweep_callback: the Hydra callback that makes a multirun one sweep (its parent
run, its table, its exit status).
"""
