# rollgym_engine moved to python/ at the repository's top level; this stub only says so to an old sys.path.
raise ImportError("rollgym_engine moved from protocol/python/ to python/: pip install -e python, or sys.path.insert(0, 'python') (PYTHONPATH=python)")
