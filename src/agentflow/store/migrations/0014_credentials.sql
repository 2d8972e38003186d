-- Credentials (issue 13): named secrets of a workspace that nodes reference by name
-- (`credential: crm-api`). The secret part (keys, passwords, client secrets, OAuth2 tokens) is
-- one JSON document sealed with AES-256-GCM (AGENTFLOW_SECRET_KEY), bound to its workspace and
-- name; `metadata` holds what is not secret and may be shown (header name, token URL, client
-- id, scopes). `version` counts changes of the secret: a replacement or a token refresh.
--
-- OAuth2 refreshes are claimed like leases, never by holding a transaction (or a lock) across
-- the call to the token endpoint: a worker claims the row (refresh_owner, refresh_until) with
-- a conditional update on the version it saw; others wait for the version to move on; the
-- claimant's write is fenced on its claim.
CREATE TABLE credentials (
    id                uuid PRIMARY KEY,
    workspace_id      uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    name              text NOT NULL,
    kind              text NOT NULL CHECK (kind IN ('api_key', 'basic', 'bearer',
                                                    'oauth2_client_credentials',
                                                    'oauth2_authorization_code')),
    metadata          jsonb NOT NULL DEFAULT '{}',
    secret            bytea NOT NULL,
    secret_fields     text[] NOT NULL DEFAULT '{}',   -- names of the sealed fields, not values
    token_expires_at  timestamptz,                    -- the OAuth2 access token's, when known
    version           bigint NOT NULL DEFAULT 1,
    refresh_owner     uuid,
    refresh_until     timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    UNIQUE (workspace_id, name)
);
