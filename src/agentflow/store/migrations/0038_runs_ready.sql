-- Ready runs (no lease holder, due) get an index of their own, and the index of every due run
-- goes: held runs are in runs_lapsed already.
--
-- A claim or a heartbeat moves a held run's due_at: its new entry went into both runs_due and
-- runs_lapsed, now only into runs_lapsed. And the claim's search for ready runs no longer
-- has to step over held ones: under statistics taken while most runs were held (a queue
-- table changes faster than its statistics), the planner judged runs_due's entries mostly
-- not ready and read the whole table instead, then sorted its ready runs, at every claim
-- (tests/integration/test_claim_plans.py).
CREATE INDEX runs_ready ON runs (due_at) WHERE lease_owner IS NULL AND due_at IS NOT NULL;
DROP INDEX runs_due;
