"""Fixtures of the race tests: state stores on SQLite and PostgreSQL, as the state tests use."""

from tests.state.conftest import postgres_database, state_url  # noqa: F401  (fixtures)
