"""The demo's jobs (examples/jobs/demo_jobs) as seen from outside the platform: how a test or a
benchmark declares their stages (demo.stages) and what each must output (demo.oracles). Both
tests/ and bench/ import it; the platform itself names none of these jobs
(tests/unit/test_architecture.py), so it lives beside the package, not in it."""
