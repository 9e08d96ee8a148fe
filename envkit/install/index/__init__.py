"""Reading package indexes, the way pip does, without installing anything: an index's pages
(pages.py) and the sources pip itself is configured with (pip_config.py). Every network failure
becomes one line naming the URL."""
