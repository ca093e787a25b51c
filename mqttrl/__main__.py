from mqttrl.entry import main

main()
