from spamfilter.cli import main

raise SystemExit(main())
