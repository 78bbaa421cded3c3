"""Many hosts: each host file read (in-process, worker processes or Dask), reduced there, and merged."""
