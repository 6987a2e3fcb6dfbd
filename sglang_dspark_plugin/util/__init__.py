"""Small shared helpers: the safe logger, bounded reprs, integer checks."""
