"""One job's process, and nothing above it. Parent side: task (one job, from its config to its recorded run),
runner (its process), ranks (a torchrun job's launcher and which rank failed), devicelock, preflight (the hub),
stall, files, context (the sweep context a job reads from its environment). Child side: child (build and train),
child_setup, library_warnings, watchdog. Both: joblog. What a job's results say (the answer, its code) is
`pipeline.answer`'s; the Hydra callback that makes a multirun one sweep is `pipeline.commands.sweep_callback`."""
