-- Callbacks and event waits (issue 13), links (issue 14): a wait_callback node waits on a
-- request of kind 'callback', answered by the first POST to its single-use URL; a person may
-- answer through an emailed link. Such links carry a secret token; `link_tokens` keeps only
-- each token's SHA-256, mapped to whom the link was given. A wait node with for_event waits on a request of kind 'event', answered
-- by the dispatcher with the first event of spec.topic that meets spec.match. Both go through
-- the same conditional update, inbox delivery and timeout sweep as a person's answer.
ALTER TABLE requests
    DROP CONSTRAINT requests_kind_check,
    ADD CONSTRAINT requests_kind_check
        CHECK (kind IN ('approval', 'input', 'selection', 'review', 'callback', 'event')),
    ADD COLUMN link_tokens jsonb NOT NULL DEFAULT '{}';

-- The dispatcher's look-up, per batch of events: pending event waits by topic.
CREATE INDEX requests_event_waits ON requests (workspace_id, (spec->>'topic'))
    WHERE status = 'pending' AND kind = 'event';
