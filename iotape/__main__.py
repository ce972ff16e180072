from iotape.cli import main

main()
