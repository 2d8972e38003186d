-- Rescues count only the workers lost while a run's step ran (issue 10, "leases under load").

-- The fencing token under which the run's current step began: equal to fencing_token when
-- the lease holder had begun the step, so a lapsed lease tells whether the step was cut off
-- (a rescue, counted against max_rescues) or the worker died before it began (counted apart,
-- against a larger cap: a run must not crash-loop, but bystanders of a crash are not poison).
ALTER TABLE runs
    ADD COLUMN began_token bigint,
    ADD COLUMN unstarted_rescues integer NOT NULL DEFAULT 0;

-- Lapsed leases are claimed first (they have waited longest): found without reading the
-- ready backlog, however long it is.
CREATE INDEX runs_lapsed ON runs (due_at) WHERE lease_owner IS NOT NULL;
