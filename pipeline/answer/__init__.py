"""The answer: what a study or a sweep found, read from what it holds. The study's answer (study: computed from
what the study decided; conclusion: printed and logged when the study ends) with its trials' table (table), its
speed-up over the baseline (speedup), what each knob bought (gains) and what more devices gave (scaling); a recorded
sweep or study read back (results); the answer as code (script: a config's plain TRL script; code: written and
recorded for a config, a study's answer and a sweep's winner); result cards (card) and their merge by GPU
(card_merge); optuna-dashboard's study pages (study_pages). Above `search` and `jobs`, whose records it reads."""
