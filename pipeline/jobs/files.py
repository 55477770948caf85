"""Names of the files a job process writes into its work directory (shared by both sides, importing nothing)."""

RESULT_FILE = "result.json"  # the whole record, written atomically at the end
STEPS_FILE = "steps.jsonl"  # one line per optimizer step, appended as the job goes
SPEC_FILE = "spec.json"  # the job's spec, for the `subprocess` launcher
PROCESS_FILE = "process.json"  # the job's pid and its owner's, written by the parent once the job started
JOB_LOG = "job.log"  # everything the job process printed (jobs.joblog)
PROFILE_DIR = "profile"  # measure.profile=true: trace.json and profile_summary.json
