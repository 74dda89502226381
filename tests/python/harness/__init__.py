"""Engine harnesses: replay the call sequences engines make on an adapter."""
