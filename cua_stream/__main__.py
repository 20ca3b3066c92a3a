from cua_stream.cli import main

main()
