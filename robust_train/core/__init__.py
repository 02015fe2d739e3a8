"""Plumbing every layer shares, defined once: argument checks (`validation`), model modes,
chunking and generators (`runtime`), option sets (`options`), the registry with discovery
(`registry`), which class paths a handed file may import (`trust`), Lightning's noise filters
(`lightning_noise`) and the Lightning class lookup that serves both Lightning packages
(`lightning_compat`). It imports nothing else of robust_train.
"""
