from acesql.cli import main

main()
