-- Free-text replies to requests (issue 14, seed 001 section 7): an emailed reply to a request
-- is kept as it arrived, then read by the workflow's model, which scores how much it answers
-- the request: relevant (score >= 0.7) answers it, filtered (<= 0.3) is ignored, uncertain is
-- held for a person in the inbox. Workers claim unread replies with a lease (as the notifier
-- claims notifications); the same message (Message-ID) is kept once per request.
CREATE TABLE request_replies (
    workspace_id     uuid NOT NULL,
    id               uuid NOT NULL DEFAULT gen_random_uuid(),
    request_id       uuid NOT NULL,
    via              text NOT NULL CHECK (via IN ('email', 'slack')),
    message_id       text NOT NULL,
    sender           text NOT NULL,           -- the From address
    given_to         text NOT NULL,           -- whom the reply address was given to
    text             text NOT NULL,           -- the sender's own words, quotes removed
    received_at      timestamptz NOT NULL DEFAULT now(),
    label            text CHECK (label IN ('relevant', 'filtered', 'uncertain')),  -- NULL: not read
    score            real CHECK (score >= 0 AND score <= 1),
    verdict          jsonb,                   -- the model's reading: answer, reason, model, tokens
    outcome          text CHECK (outcome IN ('answered', 'held', 'ignored', 'late')),  -- NULL: unread
    classified_at    timestamptz,
    attempts         integer NOT NULL DEFAULT 0,
    lease_owner      text,
    lease_expires_at timestamptz,
    due_at           timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace_id, id),
    UNIQUE (workspace_id, request_id, message_id),
    FOREIGN KEY (workspace_id, request_id) REFERENCES requests (workspace_id, id) ON DELETE CASCADE
);
-- The Slack threads a request was posted as (a bot's chat.postMessage answers its channel and
-- ts): a reply in one of them is a reply to that request.
CREATE TABLE request_threads (
    workspace_id uuid NOT NULL,
    request_id   uuid NOT NULL,
    channel      text NOT NULL,
    ts           text NOT NULL,
    PRIMARY KEY (channel, ts),
    FOREIGN KEY (workspace_id, request_id) REFERENCES requests (workspace_id, id) ON DELETE CASCADE
);
-- Unread replies, in the order they became due (a failed reading waits before the next try).
CREATE INDEX request_replies_unread ON request_replies (due_at) WHERE outcome IS NULL;
CREATE INDEX request_replies_held ON request_replies (workspace_id, received_at) WHERE outcome = 'held';
