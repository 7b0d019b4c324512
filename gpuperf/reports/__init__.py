"""Views of a results table: rich tables, JSON and CSV (tables.py), HTML (html.py)."""
