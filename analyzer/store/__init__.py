"""The store: DuckDB and ClickHouse backends, their queries, the run catalog, ingest and export."""
