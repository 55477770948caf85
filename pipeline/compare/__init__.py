"""The one comparison engine: every claim that one config is faster than another, across processes.

`paired` holds the statistic (per-round paired log ratios, Student's t, the judgement with the margin it
certifies), `ranking` ranks a sweep's configs from their repeats, and `sequential` runs a study's confirmation round
(its plan from the noise already seen, its stopping rule and its budget). Medians come in as `medians[config][round]`:
the runs of one round are neighbours in time.
"""
