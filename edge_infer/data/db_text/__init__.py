"""The DB-style text detector fixture: see README.md here; ``scenes`` draws its scenes."""
