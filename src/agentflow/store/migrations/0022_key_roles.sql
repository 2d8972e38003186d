-- Roles for API keys (issue 15): `admin` may do everything in its workspace, `operator` may run
-- things (start, cancel, retry, answer, publish events and workflows) but not manage keys,
-- credentials, people or budgets, `viewer` may only read. Keys made before roles keep what they
-- could do: admin.
ALTER TABLE access_keys ADD COLUMN role text NOT NULL DEFAULT 'admin'
    CHECK (role IN ('admin', 'operator', 'viewer'));
