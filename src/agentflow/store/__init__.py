"""The only package that speaks SQL: connections, the embedded server, migrations, queries."""
