"""Node kinds: one module each, found through ``registry``."""
