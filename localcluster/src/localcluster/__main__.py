"""`python -m localcluster serve --dir DIR ...`: the local cluster as a foreground process (what
`localcluster up` starts in the background; see `localcluster._internal.cluster.serve`)."""

from localcluster._internal.cluster.serve import main

if __name__ == "__main__":
    main()
