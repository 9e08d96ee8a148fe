"""(docstring to follow)"""
