"""The offset probe: its definitions, the live probe of served rounds, and its decision rule."""
