-- Callbacks (issue 13): a wait_callback node waits on a request of kind 'callback', answered
-- by the first POST to its single-use URL (whose token's SHA-256 is in spec.token_sha256),
-- through the same conditional update, inbox delivery and timeout sweep as a person's answer.
ALTER TABLE requests
    DROP CONSTRAINT requests_kind_check,
    ADD CONSTRAINT requests_kind_check
        CHECK (kind IN ('approval', 'input', 'selection', 'review', 'callback'));
