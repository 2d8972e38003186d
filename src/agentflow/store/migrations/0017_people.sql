-- People (issue 14): who may be asked, and how to reach them. A request's assignees name
-- people by handle, or a role (`role:finance`) that stands for every person who holds it when
-- the request is made; the email channel mails each person's address.
CREATE TABLE people (
    workspace_id uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    handle       text NOT NULL,
    name         text,
    email        text,
    roles        text[] NOT NULL DEFAULT '{}',
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace_id, handle)
);
CREATE INDEX people_by_role ON people USING gin (roles);
