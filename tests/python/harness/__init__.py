# SPDX-License-Identifier: GPL-2.0
"""Engine harnesses: replay the call sequences engines make on an adapter."""
