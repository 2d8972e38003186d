-- The knowledge base behind the agent tool generate_plan(scenario): documents (the playbooks
-- agentflow ships, source 'builtin', and operators' own, source 'operator') split into chunks
-- by heading, found by full-text search and, where pgvector is available, by embedding.

CREATE TABLE knowledge_documents (
    workspace_id  uuid NOT NULL REFERENCES workspaces (id) ON DELETE CASCADE,
    id            uuid NOT NULL,
    title         text NOT NULL,
    source        text NOT NULL CHECK (source IN ('builtin', 'operator')),
    tags          text[] NOT NULL DEFAULT '{}',
    body          text NOT NULL,
    content_hash  text NOT NULL,     -- of title, tags and body: re-adding the same content writes nothing
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace_id, id),
    -- One document per title: adding a title again replaces it (an operator's document with a
    -- shipped playbook's title overrides that playbook).
    UNIQUE (workspace_id, title)
);

CREATE TABLE knowledge_chunks (
    workspace_id  uuid NOT NULL,
    document_id   uuid NOT NULL,
    n             integer NOT NULL,  -- position in the document, from 0
    heading       text,
    body          text NOT NULL,
    tsv           tsvector GENERATED ALWAYS AS
                      (to_tsvector('english', coalesce(heading, '') || ' ' || body)) STORED,
    PRIMARY KEY (workspace_id, document_id, n),
    FOREIGN KEY (workspace_id, document_id)
        REFERENCES knowledge_documents (workspace_id, id) ON DELETE CASCADE
);
CREATE INDEX knowledge_chunks_tsv ON knowledge_chunks USING gin (tsv);

-- Optional embeddings. Where the server offers pgvector (the embedded server does) and this
-- role may create it, chunks get an `embedding vector` column. It has no fixed dimension on
-- purpose: any embedder works, and searches compare only vectors of the query's dimension
-- (the price: no ANN index, which a knowledge base of playbooks does not need). Without
-- pgvector the column is absent and retrieval is full text only; the migration succeeds.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'vector')
       AND EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector') THEN
        BEGIN
            CREATE EXTENSION vector;
        EXCEPTION WHEN OTHERS THEN
            RAISE NOTICE 'pgvector not enabled (%): knowledge search uses full text only', SQLERRM;
        END;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'vector') THEN
        EXECUTE 'ALTER TABLE knowledge_chunks ADD COLUMN embedding vector';
    END IF;
END
$$;
