from ngramspec.server.app import main

main()
