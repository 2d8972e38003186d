-- Traces (issue 16): the W3C `traceparent` of the span that started a run: the caller's (an API
-- request that carried one, an application's own span around `engine.start`) or the parent
-- run's span for a child run. NULL for a run started outside any trace (an event, a schedule):
-- its trace is then its own, with the run's id as trace id. Every worker that executes one of
-- the run's steps reads it here, so the run's spans form one trace whichever process ran them.
ALTER TABLE runs ADD COLUMN trace_parent text;
