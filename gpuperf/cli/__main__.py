from gpuperf.cli import main

main()
