-- Events carry the trace they were published in (issue 16): the span current when an event
-- was published (an API request with a traceparent, an application's own span), so the runs
-- the event starts continue that trace, as runs started through the API do.
ALTER TABLE events ADD COLUMN trace_parent text;
