-- Resource references (issue 15, seed 004): what each published version uses (credentials,
-- child workflows, employees, tools, people, roles) as 'kind:name' strings, GIN-indexed so
-- "which workflows use this?" is one index lookup. NULL: published before references were
-- recorded; they are filled in from the stored config before the first lookup needs them.
ALTER TABLE workflow_versions ADD COLUMN refs text[];
CREATE INDEX workflow_versions_refs ON workflow_versions USING gin (refs);
CREATE INDEX workflow_versions_refs_missing ON workflow_versions (workspace_id) WHERE refs IS NULL;

-- Versions stay immutable; the one change allowed is recording the references of a version
-- that has none yet.
CREATE OR REPLACE FUNCTION agentflow_versions_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.refs IS NULL AND NEW.refs IS NOT NULL AND to_jsonb(NEW) - 'refs' = to_jsonb(OLD) - 'refs' THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'workflow_versions rows are immutable; publish a new version instead';
END $$;

-- Archived workflows (disabled, out of the default list, started by nothing) keep their
-- versions and runs; deleting a workflow removes them.
ALTER TABLE workflows ADD COLUMN archived_at timestamptz;
