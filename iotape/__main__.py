from iotape.launch import main

main()
