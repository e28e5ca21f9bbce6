"""``veriloco dashboard``: a read-only web page of a run, live from the chain.

* :mod:`.state` — what the page shows, as one pydantic document built from chain reads (pure);
* :mod:`.source` — reads a run's chain (embedded state file or a node), caching closed epochs;
* :mod:`.app` — the FastAPI app: the page (``/``) and its data (``/api/state``);
* ``page.html`` — the page: HTML, CSS and a little JavaScript, no dependency, nothing fetched
  from elsewhere; it polls ``/api/state`` and redraws.
"""
