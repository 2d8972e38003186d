-- OAuth2 consents in flight (issue 13): agentflow sends a person to the provider's consent page
-- with a `state` and a PKCE challenge, and takes the code the provider redirects back with. A
-- row lives from the consent URL to the callback, which takes it once (delete ... returning):
-- the state's SHA-256, the credential it is for, the redirect URI named, and the PKCE verifier
-- sealed with the secret key.
CREATE TABLE oauth2_consents (
    state_hash      text PRIMARY KEY,
    workspace_id    uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    credential_name text NOT NULL,
    redirect_uri    text NOT NULL,
    verifier        bytea NOT NULL,
    expires_at      timestamptz NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX oauth2_consents_expiry ON oauth2_consents (expires_at);
