"""The pure domain: definitions, decisions and rules. No I/O is imported here."""
