"""The ``memjobs`` command line."""
