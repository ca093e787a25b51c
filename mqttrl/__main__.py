from mqttrl.cli import main

main()
