"""The one comparison engine: every claim that one config is faster than another, between processes.

`paired` holds the statistic (per-round paired log ratios, Student's t, the judgement with its margin), `rounds`
the measurements it is made of (medians of fresh-process runs, by config and round), `sequential` the study's
confirmation round (its plan from the noise already seen, its stopping rule and budget), `ranking` the ranks of a
sweep's configs from its repeats.
"""
