-- AI teammates (issue 12, seed 002 `employee` workflows): a third kind of workflow, run as an
-- agent with a persona; `run_employee` nodes hand it assignments.
ALTER TABLE workflows DROP CONSTRAINT workflows_kind_check;
ALTER TABLE workflows ADD CONSTRAINT workflows_kind_check CHECK (kind IN ('agent', 'structured', 'employee'));
