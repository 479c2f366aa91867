from marinbuild.cli.main import main

main()
