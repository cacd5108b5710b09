"""Source adapters, one package per change source; the only code that knows a wire format."""
