-- Runs with code steps go to workers that run code (issue 13): a version needs such a worker
-- when a run_code node appears anywhere in its config (a graph's nodes, an agent's attached
-- tools). Workers with code steps off claim only runs of versions that do not.
ALTER TABLE workflow_versions ADD COLUMN needs_code boolean NOT NULL
    GENERATED ALWAYS AS (jsonb_path_exists(config, '$.** ? (@.type == "run_code")')) STORED;

-- A BEFORE trigger sees a generated column unset in NEW: the one allowed change (recording a
-- version's references, migration 0026) compares the rows without it.
CREATE OR REPLACE FUNCTION agentflow_versions_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.refs IS NULL AND NEW.refs IS NOT NULL
       AND to_jsonb(NEW) - 'refs' - 'needs_code' = to_jsonb(OLD) - 'refs' - 'needs_code' THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'workflow_versions rows are immutable; publish a new version instead';
END $$;
