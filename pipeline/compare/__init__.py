"""The one comparison engine: every claim that one config is faster than another, across processes.

`paired` holds the statistic (per-round paired log ratios, Student's t, the judgement with the margin it
certifies) and `ranking` ranks a sweep's configs from their repeats; a study's confirmation round
(`search._confirmation`) judges its pairs with `paired` too. Medians come in as `medians[config][round]`:
the runs of one round are neighbours in time.
"""
