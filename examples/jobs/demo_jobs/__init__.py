"""The demo's pipelines, as a team would write them: each is a job, `build(records, params)`,
named in apps.yaml (`job: demo_jobs.web:wordcount`) and run by streamops like any other."""
